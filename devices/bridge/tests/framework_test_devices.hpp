// The framework devices' tests share one device object per name, and skip a test, naming the
// reason, where the device cannot run here.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "framework_devices.hpp"

namespace fusebench::framework {

inline const engine::Device& device(const std::string& name) {
  static std::map<std::string, std::unique_ptr<engine::Device>> devices;
  register_framework_devices();
  auto& d = devices[name];
  if (!d) d = engine::make_device(name);
  return *d;
}

}  // namespace fusebench::framework

#define SKIP_UNLESS_AVAILABLE(name)                                       \
  do {                                                                    \
    const std::string why = device(name).unavailable_reason();            \
    if (!why.empty()) GTEST_SKIP() << "device " << (name) << ": " << why; \
  } while (0)
