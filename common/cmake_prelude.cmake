# Kernel preludes: the text every generated kernel starts with, pasted into a raw string literal
# by configure_file. A device's renderer calls these for its own template (devices/<name>/).

# fusebench_generate_prelude(TEMPLATE OUTPUT [NO_INCLUDES]): configures TEMPLATE into OUTPUT with
# @FUSEBENCH_FLOAT_FORMATS@ and @FUSEBENCH_SCALAR_MATH@ set to the text of float_formats.hpp and
# scalar_math.hpp, without their include guards and project includes (NO_INCLUDES: without any
# include, for a compiler without host headers such as NVRTC). The template's other @VARIABLES@
# are the caller's (fusebench_read_kernel_text).
function(fusebench_generate_prelude template out)
  cmake_parse_arguments(PARSE_ARGV 2 arg "NO_INCLUDES" "" "")
  set(include_dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/include/fusebench)
  file(READ ${include_dir}/float_formats.hpp FUSEBENCH_FLOAT_FORMATS)
  file(READ ${include_dir}/engine/scalar_math.hpp FUSEBENCH_SCALAR_MATH)
  if(arg_NO_INCLUDES)
    set(include_pattern "#include [<\"][^>\"]*[>\"]")
  else()
    set(include_pattern "#include \"fusebench/[^\"]*\"")
  endif()
  foreach(var FUSEBENCH_FLOAT_FORMATS FUSEBENCH_SCALAR_MATH)
    string(REGEX REPLACE "#pragma once" "" ${var} "${${var}}")
    string(REGEX REPLACE "${include_pattern}" "" ${var} "${${var}}")
  endforeach()
  configure_file(${template} ${out} @ONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${include_dir}/float_formats.hpp ${include_dir}/engine/scalar_math.hpp)
endfunction()

# fusebench_read_kernel_text(VAR FILE): VAR = the text of FILE after its line
# "// ---- kernel text (pasted from the next line to the end of the file)", without leading and
# trailing whitespace: a header that host code includes and a prelude pastes (a kernel ABI).
function(fusebench_read_kernel_text var file)
  file(READ ${file} text)
  set(marker "// ---- kernel text (pasted from the next line to the end of the file)\n")
  string(FIND "${text}" "${marker}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${file} has no line \"${marker}\"")
  endif()
  string(LENGTH "${marker}" marker_length)
  math(EXPR at "${at} + ${marker_length}")
  string(SUBSTRING "${text}" ${at} -1 text)
  string(STRIP "${text}" text)
  set(${var} "${text}" PARENT_SCOPE)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
endfunction()
