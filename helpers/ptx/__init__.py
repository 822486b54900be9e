"""A PTX executor: runs the PTX that NVRTC produces for the course's kernels on the CPU, with the course's Hopper
emulator (helpers.tma, helpers.mbarrier, helpers.wgmma) as its hardware. See docs/emulator.md."""
