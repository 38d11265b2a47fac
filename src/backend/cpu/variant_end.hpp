// Closes the code of one CPU kernel variant (see variant_begin.hpp).
#pragma GCC pop_options
