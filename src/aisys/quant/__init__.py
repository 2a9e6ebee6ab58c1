"""Chapter 8's references: quantization (affine, calibration, INT8 and INT4 kernels, FP8, SmoothQuant, GPTQ,
AWQ, QAT) and the model they are measured on."""
