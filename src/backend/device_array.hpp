// An owning array in a backend's memory (RAII over Backend::alloc/release).
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.hpp"

namespace forge {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Backend& b, size_t n) { resize(b, n); }
  ~DeviceArray() { reset(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept { swap(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }

  // Grows (never shrinks) to at least n elements; contents are not kept.
  void ensure(Backend& b, size_t n) {
    if (n > capacity_ || backend_ != &b) resize(b, n);
    size_ = n;
  }
  void resize(Backend& b, size_t n) {
    reset();
    backend_ = &b;
    size_ = capacity_ = n;
    if (n) data_ = static_cast<T*>(b.alloc(n * sizeof(T)));
  }
  void upload(const std::vector<T>& host) {
    ensure(*backend_, host.size());
    if (!host.empty()) backend_->to_device(data_, host.data(), host.size() * sizeof(T));
  }
  void upload(Backend& b, const std::vector<T>& host) {
    ensure(b, host.size());
    if (!host.empty()) b.to_device(data_, host.data(), host.size() * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_) backend_->to_host(host.data(), data_, size_ * sizeof(T));
    return host;
  }
  void reset() {
    if (data_) backend_->release(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }  // elements allocated

 private:
  void swap(DeviceArray& o) {
    std::swap(backend_, o.backend_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace forge
