# Compiler settings shared by every target.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>
                    $<$<COMPILE_LANGUAGE:CXX>:-Wno-unused-parameter>)

if(WEFT_SANITIZE)
  if(NOT WEFT_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "WEFT_SANITIZE must be address, undefined or thread")
  endif()
  add_compile_options(-fsanitize=${WEFT_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${WEFT_SANITIZE})
  if(WEFT_SANITIZE STREQUAL "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()

if(WEFT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "WEFT_FUZZ needs clang (libFuzzer): -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage for libFuzzer in every library the targets link, and the bugs it finds made loud.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

if(WEFT_GPU STREQUAL "cuda")
  # sm_90a: Hopper's arch-specific features (wgmma, the GEMM's tensor-core path). Other
  # architectures build too (-DCMAKE_CUDA_ARCHITECTURES=80 ...), with mma.sync for the GEMM.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_VISIBILITY_PRESET hidden)
  find_package(CUDAToolkit REQUIRED)
elseif(WEFT_GPU STREQUAL "hip")
  set(WEFT_HIP_ARCH "gfx90a" CACHE STRING "AMD GPU architecture for the HIP build")
endif()
