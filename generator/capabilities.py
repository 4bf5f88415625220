"""The CPU capabilities generated kernels can be compiled for, in ATen's names and order of
preference (the last one the CPU and ATEN_CPU_CAPABILITY allow wins). The op files declare every
variant, each behind OPGEN_HAVE_<capability>, so generated code does not depend on the machine;
`opgen build` compiles the ones the machine's compiler targets (build.capabilities())."""

CPU_CAPABILITIES = ("DEFAULT", "AVX2", "AVX512")
