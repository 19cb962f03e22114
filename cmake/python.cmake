# The Python package (issue 16), included by CMakeLists.txt. Builds the extension `_pagellm` with
# pybind11 and lays out an importable package in ${CMAKE_BINARY_DIR}/python/pagellm:
#
#   PYTHONPATH=build/python python3 -c "import pagellm"
#
# The pure-Python files are symlinked from python/pagellm/ (edits show up without a rebuild); the
# extension is written next to them. `pip install .` (setup.py) runs this same build.
#
# Sets PAGELLM_PYTHON_ENABLED when the module is built.

set(PAGELLM_PYTHON_ENABLED OFF)
if(PAGELLM_SANITIZE OR PAGELLM_FUZZ)
  # The extension would carry the sanitizer / fuzzer runtime into an interpreter built without it.
  message(STATUS "pagellm: Python module skipped in sanitizer / fuzz builds")
  return()
endif()
if(PAGELLM_STATIC_DEPS)
  # Debian's static ICU / PCRE2 archives are not position independent, so they cannot go into a
  # shared module; build CUDA with -DPAGELLM_STATIC_DEPS=OFF for Python.
  message(STATUS "pagellm: Python module skipped with PAGELLM_STATIC_DEPS=ON (pass -DPAGELLM_STATIC_DEPS=OFF)")
  return()
endif()

# Debian's pybind11 and pytest belong to /usr/bin/python3: prefer it over an interpreter that merely
# comes first on PATH (pyenv shims), unless the caller names one (setup.py passes its own).
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(NOT Python3_FOUND OR NOT pybind11_FOUND)
  set(_why "")
  if(NOT Python3_FOUND)
    set(_why "Python 3 development files (python3-dev)")
  else()
    set(_why "pybind11 (pybind11-dev)")
  endif()
  if(NOT PAGELLM_PYTHON_MODE STREQUAL "AUTO")  # asked for explicitly
    message(FATAL_ERROR "pagellm: -DPAGELLM_PYTHON=ON but ${_why} not found; run scripts/setup.sh")
  endif()
  message(STATUS "pagellm: Python module OFF: ${_why} not found (scripts/setup.sh installs it)")
  return()
endif()

set(PAGELLM_PYTHON_DIR ${CMAKE_BINARY_DIR}/python)
file(GLOB PAGELLM_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/src/*.cpp)
# NO_EXTRAS: no LTO (the core is not LTO-built; a 2-core CI pays for it in link time).
pybind11_add_module(_pagellm NO_EXTRAS ${PAGELLM_PYTHON_SOURCES})
# A static core inside a shared module must be position independent. Nothing interposes the core's
# symbols (they are hidden inside the module), so let GCC keep inlining global functions as it does
# without -fPIC.
set_target_properties(pagellm_core PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(pagellm_core PRIVATE -fno-semantic-interposition)
target_compile_options(_pagellm PRIVATE ${PAGELLM_WARNINGS})
target_link_libraries(_pagellm PRIVATE pagellm_core)
if(PAGELLM_CUDA)
  set_target_properties(pagellm_cuda pagellm_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(_pagellm PRIVATE pagellm_cuda)
endif()
set_target_properties(_pagellm PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PAGELLM_PYTHON_DIR}/pagellm)

file(GLOB PAGELLM_PYTHON_FILES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/python/pagellm/*.py ${CMAKE_SOURCE_DIR}/python/pagellm/*.pyi
     ${CMAKE_SOURCE_DIR}/python/pagellm/py.typed)
file(MAKE_DIRECTORY ${PAGELLM_PYTHON_DIR}/pagellm)
foreach(f ${PAGELLM_PYTHON_FILES})
  get_filename_component(name ${f} NAME)
  file(CREATE_LINK ${f} ${PAGELLM_PYTHON_DIR}/pagellm/${name} SYMBOLIC)
endforeach()
# The interpreter the module was built for, for scripts/test.sh.
file(WRITE ${PAGELLM_PYTHON_DIR}/python_executable "${Python3_EXECUTABLE}\n")
set(PAGELLM_PYTHON_ENABLED ON)
message(STATUS "pagellm: Python module ON (${Python3_EXECUTABLE}, pybind11 ${pybind11_VERSION}); "
               "PYTHONPATH=${PAGELLM_PYTHON_DIR}")
