"""Fixtures of the compiler's tests: running a module's tests once per device."""
import pytest
from scheduler import Device
from tests.conftest import DEVICES


@pytest.fixture(params=DEVICES)
def each_device(request):
  """The test runs once on each device (PYTHON, and CPU where a C compiler exists) as the default device."""
  old = Device.DEFAULT
  Device.DEFAULT = request.param
  yield request.param
  Device.DEFAULT = old
