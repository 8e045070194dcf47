// Every device this build has, registered with the engine's device registry. The definition is
// generated (devices/CMakeLists.txt) from the devices' own declarations (fusebench_register_device
// in each device's folder): adding a device edits devices/ only.
#pragma once

namespace fusebench::devices {

// Registers every device built (idempotent, as each device's own registration is).
void register_all();

}  // namespace fusebench::devices
