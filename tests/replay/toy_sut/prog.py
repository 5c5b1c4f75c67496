"""A program of the toy compiler: three realizes."""
import numpy as np
from toyc import Array

x = Array.input(np.arange(8, dtype=np.float32))
print((x * 2 + 1).numpy())
print((x * x).sum().numpy())
print(((x + 3) * (x + 1)).numpy())
