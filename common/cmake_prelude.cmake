# Builds kernel_prelude.cpp: the text of float_formats.hpp and scalar_math.hpp (without their
# project includes and include guards) inside a raw string literal.
function(fusebench_generate_prelude out)
  set(include_dir ${CMAKE_CURRENT_SOURCE_DIR}/include/fusebench)
  file(READ ${include_dir}/float_formats.hpp FUSEBENCH_FLOAT_FORMATS)
  file(READ ${include_dir}/engine/scalar_math.hpp FUSEBENCH_SCALAR_MATH)
  foreach(var FUSEBENCH_FLOAT_FORMATS FUSEBENCH_SCALAR_MATH)
    string(REGEX REPLACE "#pragma once" "" ${var} "${${var}}")
    string(REGEX REPLACE "#include \"fusebench/[^\"]*\"" "" ${var} "${${var}}")
  endforeach()
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/src/engine/kernel_prelude.cpp.in ${out} @ONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${include_dir}/float_formats.hpp ${include_dir}/engine/scalar_math.hpp)
endfunction()

# Builds cuda_prelude.cpp: the same two files' text (without any include: NVRTC has no host
# headers) for the CUDA emitter.
function(fusebench_generate_cuda_prelude out)
  set(include_dir ${CMAKE_CURRENT_SOURCE_DIR}/include/fusebench)
  file(READ ${include_dir}/float_formats.hpp FUSEBENCH_FLOAT_FORMATS)
  file(READ ${include_dir}/engine/scalar_math.hpp FUSEBENCH_SCALAR_MATH)
  foreach(var FUSEBENCH_FLOAT_FORMATS FUSEBENCH_SCALAR_MATH)
    string(REGEX REPLACE "#pragma once" "" ${var} "${${var}}")
    string(REGEX REPLACE "#include [<\"][^>\"]*[>\"]" "" ${var} "${${var}}")
  endforeach()
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/src/engine/cuda_prelude.cpp.in ${out} @ONLY)
endfunction()
