# test_opencl calls the OpenCL backend's test hooks (graphs/opencl/opencl.h),
# which exist only when the library was built with OpenCL: tell it so. Without
# OpenCL the test still builds and skips (the backend reports UNSUPPORTED).
if(SD_HAVE_OPENCL AND TARGET test_opencl)
  target_compile_definitions(test_opencl PRIVATE SD_HAVE_OPENCL=1 CL_TARGET_OPENCL_VERSION=120)
endif()
