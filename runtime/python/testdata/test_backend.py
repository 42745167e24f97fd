import triton_python_backend_utils as pb_utils
import numpy as np
print("Triton Python Backend utilities imported successfully.")
# 尝试创建一个简单的Tensor
tensor = pb_utils.Tensor("INPUT", np.array([1, 2, 3], dtype=np.float32))
print(f"Tensor created: {tensor.name()}, shape: {tensor.as_numpy().shape}")
