pytest_plugins = ["pytester"]
from gemmperf_pytester_support import gp  # noqa
def test_w(gp):
    r = gp(results="res")
    print("OUTCOMES", r.parseoutcomes())
