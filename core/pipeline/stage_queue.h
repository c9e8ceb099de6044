// The queue between two stages of the in-process runtime (pipeline_runtime.h),
// also what the in-process link measurement (link_measurement.h) times, so the
// link it measures is the hand-over the runtime pays.
//
// Bounded and in order; close() wakes everyone: a waiting push or pop then
// returns false (the pipeline is stopping). A waiting thread sleeps on a
// condition variable, so a hand-over costs a wake-up, not a spin.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

namespace collage {

template <typename T>
class StageQueue {
 public:
  explicit StageQueue(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}
  bool push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    notFull_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    notEmpty_.notify_one();
    return true;
  }
  bool pop(T& item) {
    std::unique_lock<std::mutex> lock(mutex_);
    notEmpty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (closed_) return false;
    item = std::move(items_.front());
    items_.pop_front();
    notFull_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    notEmpty_.notify_all();
    notFull_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable notEmpty_, notFull_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace collage
