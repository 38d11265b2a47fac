#!/usr/bin/env python3
"""A deterministic stress corpus for byte-level BPE tokenizers.

corpus(n=12000, seed=0) returns n distinct strings (at least 10,000 by
default): hand-written cases first, then generated ones drawn with
random.Random(seed), so the list depends only on (n, seed). It covers

  ASCII prose; source code (Python, C++, JS, Rust, Go, shell, SQL, Makefile,
  JSON, YAML) with indentation, tabs, CRLF and operators; text in many scripts
  (CJK, Japanese, Korean, Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai,
  Cyrillic, Greek, Georgian, ...), precomposed and decomposed combining marks
  (NFC != NFD), zero-width and bidi controls, astral planes (including planes
  4-11, whose UTF-8 lead bytes F1/F2 some vocabularies lack); emoji with skin
  tones, ZWJ sequences, flags, keycaps, tag sequences; digit runs of every
  length 1-20, alone and next to letters and punctuation, and non-ASCII digits;
  whitespace runs (spaces, tabs, \\n, \\r\\n, \\r, NBSP, U+3000, ...) leading,
  trailing and inside; contractions ('s 't 're 've 'm 'll 'd) in any case and
  with apostrophe variants; special-token text (<|im_start|>, <|im_end|>,
  <|endoftext|>, SmolLM2's <repo_name> ...) alone, adjacent and embedded, and
  near-misses (<|im_, <|IM_END|>, < |im_end|>); agent transcripts (ChatML,
  <tool_call> JSON, <tool_response>, calc(12*7)) and JSON objects; the empty
  string, every single ASCII / Latin-1 character, and a few long strings.

All strings are valid Unicode (no lone surrogates). `python3
tokenizer_corpus.py [--n N] [--seed S] [--ascii]` writes them as JSON lines
(UTF-8; --ascii escapes non-ASCII) to stdout.
"""
import argparse
import json
import random
import sys

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
OTHER_SPECIALS = ["<repo_name>", "<file_sep>", "<filename>", "<gh_stars>", "<jupyter_code>", "<empty_output>"]
NEAR_SPECIALS = ["<|im_", "<|im_start", "im_start|>", "<|im_start|", "|im_end|>", "<|im_end", "< |im_end|>",
                 "<| im_end |>", "<<|im_start|>>", "<|IM_START|>", "<|Im_End|>", "<|endoftext", "<|endoftext|",
                 "<|end_of_text|>", "<|begin_of_text|>", "<|eot_id|>", "<||>", "<|", "|>", "<|>", "< |", "<repo_name",
                 "repo_name>", "<tool_call", "</tool_call", "<|im_start|im_end|>", "<|<|im_end|>|>"]

WORDS = ("the of and to in is it that for on with as was at by be this from or have an are not but had his they "
         "you which one were all we when your can said there use each she how their if will up other about out "
         "many then them these so some her would make like him into time has look two more write go see number "
         "no way could people my than first water been call who oil its now find long down day did get come made "
         "may part model token train batch loss gradient policy reward sample tree prefix merge kernel tensor "
         "weight layer attention cache buffer thread queue error value result function return string integer "
         "Hello World Python Forge CUDA GPU CPU API JSON HTTP URL README TODO FIXME OK NaN Inf").split()
PUNCT = [".", ",", "!", "?", ";", ":", "...", "--", "—", "–", "(", ")", "[", "]", "{", "}", "\"", "'", "/", "\\",
         "-", "_", "*", "&", "%", "$", "#", "@", "~", "^", "|", "<", ">", "=", "+", "`", "«", "»", "“", "”", "…"]

SCRIPT_TEXT = [
    "你好，世界！今天天气很好。", "机器学习模型的训练需要大量数据。", "中文和English混合123测试",
    "こんにちは、世界。カタカナとひらがな。", "東京都渋谷区の天気は晴れです", "ｶﾀｶﾅ ﾊﾝｶｸ",
    "안녕하세요 세계", "한국어 텍스트입니다.", "مرحبا بالعالم", "اللغة العربية جميلة جداً", "مُحَمَّدٌ رَسُولُ",
    "العدد ١٢٣٤٥ بالأرقام الهندية", "שלום עולם", "עִבְרִית עם ניקוד", "नमस्ते दुनिया", "हिन्दी भाषा १२३ क्षत्रिय",
    "আমি বাংলায় গান গাই", "வணக்கம் உலகம்", "สวัสดีชาวโลกภาษาไทยไม่มีช่องว่าง", "ສະບາຍດີ", "မင်္ဂလာပါ",
    "Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.", "Ґанок їжак Єва",
    "Γειά σου Κόσμε", "ΑΒΓΔ αβγδ ς σ Σ", "άέήίόύώ ΐΰ", "Բարեւ աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ልዑል",
    "Tiếng Việt có dấu: người, được, những", "İstanbul ılık ĞÜŞÖÇ ğüşöç", "Größe Straße ẞ Maß",
    "œuvre naïve déjà-vu façade Ångström", "zażółć gęślą jaźń", "Ñandú cigüeña", "Þórr ðæt", "ǅ ǈ ǋ Ǳ",
    "∀x∈ℝ: x²≥0", "∑_{i=1}^{n} i = n(n+1)/2", "→ ← ⇒ ≠ ≤ ≥ ∞ ∂ ∇ √", "™ © ® ° ± × ÷ µ ¶ §",
    "€100 £50 ¥1000 ₹500 ₿0.5 $3.50 ¢", "ＡＢＣ１２３！？", "Ⅻ ⅻ ½ ¾ ⁴²", "𝕳𝖊𝖑𝖑𝖔 𝔀𝓸𝓻𝓵𝓭", "𐍈𐌰𐌹 𓀀𓀁 𠀀𠀁",
]
COMBINING = [
    "e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "e\u0301\u0301\u0301", "\u0301", "\u0301a", "a\u20dd",
    "Z\u0351\u036b\u0343a\u0352l\u0360g\u030co\u0489", "re\u0301sume\u0301", "Ame\u0301lie", "\u1100\u1161\u11a8",
    "\u0915\u094d\u0937", "\u0e01\u0e34\u0e4a", "A\u030a", "\u212b", "\uFB01", "\u01c4", "i\u0307", "\u00e9 vs e\u0301",
]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e", "\u200f", "\u202e", "\u202d", "\u00ad",
             "\u034f", "\u180e", "\ufe0f", "\ufe0e", "\ue000", "\uf8ff", "\ufffd", "\ufffc", "\uffff", "\ufdd0"]
ASTRAL = ["\U0001d573", "\U00010348", "\U00013000", "\U00020000", "\U0002a6d6", "\U00040000", "\U0005abcd",
          "\U00080000", "\U000a0000", "\U000bffff", "\U000e0041", "\U000f0000", "\U0010fffd", "\U0010ffff"]
EMOJI = [
    "😀", "😂", "🙂", "🤖", "🚀", "🔥", "✅", "❌", "⭐", "☺", "☺︎", "☺️", "❤", "❤️", "💔", "👍",
    "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "👋🏽", "🧑🏾", "👨‍👩‍👧‍👦", "👩‍👩‍👦", "👩🏽‍💻", "🧑🏾‍🤝‍🧑🏻",
    "👨🏿‍🦰", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "🐕‍🦺", "🇺🇸", "🇯🇵", "🇩🇪", "🇺🇸🇯🇵", "🇺", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "1️⃣", "#️⃣", "*️⃣", "©️", "®", "™️", "🫠", "🥲", "🧬", "\U0001faf1\U0001f3fb\u200d\U0001faf2\U0001f3ff",
]
SPACE_ATOMS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
               " \t ", "\t\n", "\u00a0", "\u3000", "\u2009", "\u202f", "\x0b", "\x0c", "\u0085", "\u2028", "\u2029",
               " " * 8, " " * 17, "\n" * 5, "\r\n \r\n"]
APOSTROPHES = ["'", "'", "'", "\u2019", "\u2018", "\u02bc", "`", "\uff07", "\u00b4"]
CONTRACTION_BASES = ["I", "you", "we", "they", "he", "she", "it", "that", "there", "who", "don", "can", "won",
                     "isn", "John", "o", "y", "rock", "", "1990", "AI", "GPU"]
UNICODE_DIGITS = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙", "０１２３４５６７８９",
                  "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "①②③④⑤", "²³¹⁰", "ⅠⅡⅢⅣⅤ", "〇一二三",
                  # Numbers since Unicode 15 (Kawi, Kaktovik, Nag Mundari): HF's Digits splits them.
                  "\U00011F50\U00011F51\U00011F59", "\U0001D2C0\U0001D2C5\U0001D2D3", "\U0001E4F0\U0001E4F9"]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "class Tree:\n    def __init__(self, root=None):\n        self.root = root  # TODO\n\n    def __len__(self):\n"
    "        return 0 if self.root is None else 1 + sum(map(len, self.children))\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(f\"{i:>3d}\", end='')\n",
    "x = [i**2 for i in range(100) if i & 1]\nassert x[:3] == [1, 9, 25], x\n",
    "#include <vector>\n\nint main(int argc, char** argv) {\n    std::vector<int> v{1, 2, 3};\n"
    "    for (auto& x : v) x <<= 2;\n    return v.size() > 2 ? 0 : -1;\n}\n",
    "template <typename T>\nconstexpr T clamp(T x, T lo, T hi) noexcept { return x < lo ? lo : (x > hi ? hi : x); }\n",
    "if (a != b && c >= d || !e) { p->next = &q; i++; j--; k += 3; m -= 4; n *= 5; r /= 6; s %= 7; }\n",
    "const f = async (x) => { const y = await fetch(`/api/${x}`); return y?.ok ?? false; };\n",
    "let s = 'it\\'s'; console.log(s === \"it's\" ? 1 : 0); // ===, !==, =>, ...spread\n",
    "fn main() -> Result<(), Box<dyn std::error::Error>> {\n    let v: Vec<u8> = b\"abc\".to_vec();\n"
    "    println!(\"{:?}\", v);\n    Ok(())\n}\n",
    "func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {\n\tif err := s.do(r); err != nil {\n"
    "\t\thttp.Error(w, err.Error(), 500)\n\t}\n}\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}' >> out.log 2>&1\ndone\n",
    "SELECT id, COUNT(*) AS n FROM users WHERE age >= 18 AND name LIKE 'A%' GROUP BY id HAVING n > 1;\n",
    "all: build\n\nbuild:\n\t$(CC) -O2 -Wall -o $@ $^ $(LDFLAGS)\n\n.PHONY: all build\n",
    "{\"name\": \"forge\", \"version\": \"1.2.3\", \"deps\": [\"torch\", \"numpy\"], \"ok\": true, \"n\": null}\n",
    "model:\n  d_model: 576\n  n_layers: 30\n  rope_theta: 1.0e+5\n  tags: [a, b]\n",
    "<html>\n  <body class=\"main\">&lt;p&gt; &amp; &#169; &nbsp;</body>\n</html>\n",
    "    \n\t\n        return    x\n",
    "x=1;y=2;z=x<<y>>1|x&y^~z;w=x>=y<=z!=x==y\n",
    "/* block */ // line\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "\"\"\"Docstring with 'quotes' and \\\"escapes\\\".\"\"\"\nr'\\d+\\s*' b'\\x00\\xff' u'\\u00e9'\n",
    "    def f(self):\r\n        return None\r\n",
    "matrix = [[1, 2, 3],\n          [4, 5, 6]]  # 2x3\n",
    "a->b; a::b; a.b; a?.b; a..b; a...b; a..=b; a=>b; a|>b; a<>b; a<=>b\n",
]

TOOLS = {"calc": ["12*7", "3+4", "(2+3)*4", "100/7", "2**10", "17*3", "1e3-1", "-5+2"],
         "search": ["weather in Paris", "forge RL", "数学", "\"quoted\" query"],
         "read_file": ["/tmp/a.txt", "C:\\\\Users\\\\me\\\\x.py", "notes.md"]}


def _hand_written():
    out = ["", " ", "\n", "\r\n", "\t", "a", "A", "0", "'", "\"", "<", "|", ">", "<|", "|>"]
    out += [chr(c) for c in range(128)] + [chr(c) for c in range(128, 256)]
    out += SPECIALS + OTHER_SPECIALS + NEAR_SPECIALS + SCRIPT_TEXT + COMBINING + INVISIBLE + ASTRAL + EMOJI
    out += SPACE_ATOMS + UNICODE_DIGITS + CODE
    out += [c.replace("\n", "\r\n") for c in CODE] + [c.replace("    ", "\t") for c in CODE]
    # Special tokens adjacent, embedded and repeated.
    out += ["".join(SPECIALS), "<|im_start|><|im_end|>", "<|im_end|><|im_start|>", "<|im_start|>" * 3,
            "hello<|im_end|>world", "hello <|im_end|> world", " <|im_end|>", "<|im_end|> ", "\n<|im_end|>\n",
            "<|im_start|>user\nHi<|im_end|>\n", "<|im_start|>assistant\n", "x<|endoftext|>y", "<|endoftext|>\n\n",
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 17 times 3?<|im_end|>\n<|im_start|>assistant\n",
            "17 times 3 is 51.<|im_end|>", "<|im_<|im_end|>", "<|im_end|>|>", "<<|im_end|>", "<|im_end|><",
            "<repo_name>forge<file_sep>src/main.cpp\nint main(){}", "text<filename>x.py<empty_output>"]
    # Contractions, every suffix in lower/upper case.
    for suf in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for s in (suf, suf.upper(), suf.capitalize()):
            out += ["'" + s, " '" + s, "it'" + s, "IT'" + s, "x'" + s + "'", "'" + s + "'" + s]
    out += ["I'm", "I'M", "you're", "YOU'RE", "it's", "IT'S", "It'S", "don't", "DON'T", "Don'T", "we've", "WE'VE",
            "they'll", "THEY'LL", "he'd", "HE'D", "''", "'''", "rock'n'roll", "'tis", "y'all", "o'clock",
            "O'Brien", "dogs'", "'hello'", "'12", "it's'", "don't's", "isn't", "'re'", "\n's", "don’t", "I’M",
            "we‘re", "it`s", "he´d", "L'homme l'a dit", "''s", "'s's", "can't've", "'S'T'RE'VE'M'LL'D"]
    # Digit runs of every length 1..20, alone and in context.
    base = "12345678901234567890"
    for n in range(1, 21):
        d = base[:n]
        out += [d, " " + d, d + " ", "a" + d, d + "a", "x" + d + "y", "-" + d, d + ".", d + ".5", "$" + d,
                "v" + d + "." + d, "(" + d + ")", "\n" + d, d + "%", "9" * n, "0" * n, "٣" * n, "１" * n]
    out += ["3.14159", "1,000,000", "1.000.000,00", "1e-10", "0x1F", "0b1011", "0o777", "2024-01-31",
            "12:34:56", "+1 (555) 123-4567", "192.168.0.1", "v1.2.3-rc.4", "1st 2nd 3rd 4th", "10^9+7", "½+¼=¾"]
    # A few long strings.
    out += [" " * 1000, "\n" * 300, "\t" * 100, "a" * 2000, "1" * 1000, "ab" * 700, "🙂" * 200, "。" * 300,
            "<|im_end|>" * 50, " a" * 500, "x\r\n" * 200]
    return out


# ---------------------------------------------------------------- generators: rng -> str

def _words(rng, k):
    return " ".join(rng.choice(WORDS) for _ in range(k))


def gen_prose(rng):
    parts = []
    for _ in range(rng.randint(1, 4)):
        s = _words(rng, rng.randint(1, 14))
        s = s[0].upper() + s[1:]
        if rng.random() < 0.3:
            words = s.split(" ")
            words.insert(rng.randrange(len(words) + 1), rng.choice(PUNCT) + rng.choice(WORDS))
            s = " ".join(words)
        parts.append(s + rng.choice([".", ".", "!", "?", "...", ";", ":", ""]))
    return rng.choice([" ", "  ", "\n", "\n\n"]).join(parts)


def gen_code(rng):
    s = rng.choice(CODE)
    r = rng.random()
    if r < 0.2:
        s = s.replace("\n", "\r\n")
    elif r < 0.35:
        s = s.replace("    ", "\t")
    elif r < 0.45:
        s = s.replace("\n", " \t\n")  # trailing whitespace
    ident = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 12)))
    s = s.replace("x", ident) if rng.random() < 0.5 else s
    lines = s.split("\n")
    a = rng.randrange(len(lines))
    b = rng.randint(a + 1, len(lines))
    return "\n".join(lines[a:b])


def gen_script(rng):
    k = rng.randint(1, 3)
    pieces = [rng.choice(SCRIPT_TEXT) for _ in range(k)]
    if rng.random() < 0.5:
        pieces.insert(rng.randrange(k + 1), _words(rng, rng.randint(1, 3)))
    if rng.random() < 0.3:
        pieces.append(rng.choice(COMBINING))
    if rng.random() < 0.2:
        pieces.insert(rng.randrange(len(pieces) + 1), rng.choice(INVISIBLE))
    s = rng.choice([" ", "", "\n", "，"]).join(pieces)
    if rng.random() < 0.3:  # a random substring, maybe cutting between combining marks
        a = rng.randrange(len(s))
        s = s[a:a + rng.randint(1, 30)]
    return s


def gen_emoji(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.5:
            out.append(rng.choice(EMOJI))
        elif r < 0.8:
            out.append(rng.choice(WORDS))
        else:
            out.append(rng.choice(PUNCT + [" ", "\n", "123"]))
    return rng.choice(["", " "]).join(out)


def gen_digits(rng):
    n = rng.randint(1, 20)
    d = "".join(rng.choice("0123456789") for _ in range(n))
    r = rng.random()
    if r < 0.15:
        return d
    if r < 0.3:
        alphabet = rng.choice(UNICODE_DIGITS)
        d = "".join(alphabet[int(c) % len(alphabet)] for c in d)
    left = rng.choice(["", " ", "  ", "a", "abc", "x=", "$", "-", "+", "(", "#", "v", "\n", "\t", "'", "é", "日"])
    right = rng.choice(["", " ", ".", ",", "%", "px", "th", ")", "e5", "abc", ".0", ":", "\n", "k", "年", "!"])
    s = left + d + right
    if rng.random() < 0.4:
        s += rng.choice([".", ",", " ", "-", "/", ":", "e"]) + "".join(rng.choice("0123456789")
                                                                     for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.3:
        s = _words(rng, rng.randint(1, 3)) + " " + s
    return s


def gen_whitespace(rng):
    out = []
    if rng.random() < 0.5:
        out.append(rng.choice(SPACE_ATOMS))
    for _ in range(rng.randint(1, 5)):
        out.append(rng.choice(WORDS + ["123", "é", "日本", "!", "<|im_end|>", "'s"]))
        out.append("".join(rng.choice(SPACE_ATOMS) for _ in range(rng.randint(1, 3))))
    if rng.random() < 0.5:
        out.pop()  # no trailing whitespace
    if rng.random() < 0.1:
        out = ["".join(rng.choice(SPACE_ATOMS) for _ in range(rng.randint(1, 8)))]  # whitespace only
    return "".join(out)


def gen_contraction(rng):
    base = rng.choice(CONTRACTION_BASES)
    suf = rng.choice(["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "VE", "M", "LL", "D", "Re", "rE",
                      "Ve", "Ll", "lL", "x", "", "st"])
    if rng.random() < 0.3:
        base = base.upper()
    s = base + rng.choice(APOSTROPHES) + suf
    if rng.random() < 0.6:
        s = rng.choice(["", " ", "\n", "\"", "("]) + s + rng.choice(["", " ", ".", "'", " " + rng.choice(WORDS)])
    if rng.random() < 0.3:
        s = _words(rng, rng.randint(1, 3)) + " " + s
    return s


def gen_special(rng):
    pool = SPECIALS * 3 + OTHER_SPECIALS + NEAR_SPECIALS
    out = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.45:
            out.append(rng.choice(pool))
        elif r < 0.8:
            out.append(_words(rng, rng.randint(1, 3)))
        else:
            out.append(rng.choice(SPACE_ATOMS + PUNCT + ["user\n", "assistant\n", "system\n"]))
    return rng.choice(["", "", " ", "\n"]).join(out)


def _json_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([rng.randint(-1000, 10 ** rng.randint(1, 12)),
                           round(rng.uniform(-1e3, 1e3), rng.randint(0, 6)),
                           True, False, None, rng.choice(WORDS), "é\"\\/\n\t", "日本語", "🙂", ""])
    if r < 0.65:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(WORDS): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def gen_json(rng):
    v = {rng.choice(WORDS): _json_value(rng) for _ in range(rng.randint(1, 4))}
    return json.dumps(v, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 2, 4, "\t"]))


def gen_agent(rng):
    tool = rng.choice(sorted(TOOLS))
    arg = rng.choice(TOOLS[tool])
    call = json.dumps({"name": tool, "arguments": {"expr" if tool == "calc" else "query": arg}})
    result = str(rng.randint(-100, 10 ** 6)) if tool == "calc" else _words(rng, rng.randint(2, 8))
    style = rng.randrange(5)
    if style == 0:
        return f"<tool_call>\n{call}\n</tool_call>"
    if style == 1:
        return f"<tool_response>\n{result}\n</tool_response>"
    if style == 2:
        return f"{tool}({arg})" + rng.choice(["", " = " + result, "\n" + result, " -> " + result])
    turns = [("system", "You are a helpful assistant with tools."),
             ("user", f"Please compute {arg}." if tool == "calc" else f"Find {arg}"),
             ("assistant", f"<tool_call>\n{call}\n</tool_call>"),
             ("tool", f"<tool_response>\n{result}\n</tool_response>"),
             ("assistant", f"The answer is {result}.")]
    if style == 3:
        turns = turns[rng.randint(0, 2):rng.randint(3, 5)]
        text = "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns)
        return text + ("<|im_start|>assistant\n" if rng.random() < 0.5 else "")
    return f"Thought: I should use {tool}.\nAction: {tool}\nAction Input: {arg}\nObservation: {result}\n"


def gen_random_unicode(rng):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF), (0x3000, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF), (0xFB00, 0xFFFD), (0x10000, 0x1FAFF),
              (0x20000, 0x2A6DF), (0x30000, 0x10FFFF), (0x0, 0x1F), (0x300, 0x36F)]
    out = []
    for _ in range(rng.randint(1, 12)):
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            c = 0xFFFD
        out.append(chr(c))
    return "".join(out)


def gen_single(rng):
    r = rng.random()
    if r < 0.5:
        return chr(rng.randint(0x100, 0x2FFF))
    if r < 0.8:
        return rng.choice(EMOJI + ASTRAL + INVISIBLE)
    return chr(rng.randint(0x10000, 0x3FFFF))


def gen_mix(rng):
    gens = [gen_prose, gen_code, gen_script, gen_emoji, gen_digits, gen_whitespace, gen_contraction,
            gen_special, gen_json, gen_agent, gen_random_unicode]
    return rng.choice(["", " ", "\n"]).join(rng.choice(gens)(rng) for _ in range(rng.randint(2, 4)))


GENERATORS = [(gen_prose, 10), (gen_code, 10), (gen_script, 10), (gen_emoji, 6), (gen_digits, 10),
              (gen_whitespace, 10), (gen_contraction, 8), (gen_special, 8), (gen_json, 5), (gen_agent, 8),
              (gen_random_unicode, 6), (gen_single, 2), (gen_mix, 7)]


def corpus(n=12000, seed=0):
    """n distinct strings: the hand-written cases, then generated ones."""
    rng = random.Random(seed)
    out = dict.fromkeys(_hand_written())  # insertion-ordered set
    fns = [g for g, _ in GENERATORS]
    weights = [w for _, w in GENERATORS]
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n:
            raise RuntimeError(f"could not generate {n} distinct strings")
        out.setdefault(rng.choices(fns, weights)[0](rng))
    return list(out)[:n]


def nfc_corpus(n=3000, seed=1):
    """n strings that exercise NFC: text in NFD, letters with random marks in
    random order, Hangul syllables and raw jamo, singletons, composition
    exclusions and starters that compose with starters."""
    import unicodedata
    rng = random.Random(seed)
    marks = [chr(c) for c in range(0x300, 0x370)] + [chr(c) for c in (0x591, 0x5B0, 0x5C1, 0x64B, 0x651, 0x93C,
                                                                      0x94D, 0x1AB0, 0x1DC0, 0x20D0, 0x302A, 0x3099)]
    bases = "aeiouyAEIOUcCnNsSzZgGkKwWαεηιουωΑΕΗΙΟΥΩаеиоуАЕИОУ" + "\u0915\u0B47\u0DD9\u304B\u30CF\u05D0"
    special = ["\u212B", "\u2126", "\u0340", "\u0341", "\u0343", "\u0344", "\u0958", "\uFB1D", "\u2ADC",
               "\U0001D15E", "\u0B47\u0B3E", "\u0B47\u0B57", "\u0DD9\u0DCF", "\u0DD9\u0DDF", "\u1E9B\u0323",
               "\u0F73", "\u0F75", "\u0F81", "\u2329", "\uF900", "\U0002F800"]
    words = ["Việt Nam", "café", "naïve", "Ångström", "Ελληνικά", "ĉu", "Zürich", "한국어", "ḍḥṃ", "ǅemal"]
    out = dict.fromkeys(special)
    while len(out) < n:
        k = rng.randrange(6)
        if k == 0:  # NFD text
            s = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
            out.setdefault(unicodedata.normalize("NFD", s))
        elif k == 1:  # letters with marks in any order
            s = "".join(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 4)))
                        for _ in range(rng.randint(1, 6)))
            out.setdefault(s)
        elif k == 2:  # Hangul: syllables decomposed, or raw jamo sequences
            syll = "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(rng.randint(1, 5)))
            jamo = "".join(chr(rng.choice([rng.randrange(0x1100, 0x1113), rng.randrange(0x1161, 0x1176),
                                           rng.randrange(0x11A7, 0x11C3)])) for _ in range(rng.randint(1, 8)))
            out.setdefault(rng.choice([unicodedata.normalize("NFD", syll), jamo, syll + jamo]))
        elif k == 3:  # marks first, or around specials
            out.setdefault("".join(rng.choice(marks) for _ in range(rng.randint(1, 3))) +
                           rng.choice(special) + rng.choice(words))
        elif k == 4:  # mixed with ASCII and a special-token text
            out.setdefault(rng.choice(words) + " <|im_end|>" + unicodedata.normalize("NFD", rng.choice(words)))
        else:  # any code point of a mark-heavy block
            out.setdefault("".join(chr(rng.randrange(0x300, 0x1100)) for _ in range(rng.randint(1, 6))))
    return list(out)[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ascii", action="store_true", help="escape non-ASCII characters")
    args = ap.parse_args()
    out = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    for s in corpus(args.n, args.seed):
        out.write(json.dumps(s, ensure_ascii=args.ascii) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
