"""The demo data's command line (`python tools/demo_data.py fetch`, ...);
the code is bertexp/util/demo_data.py, which the tests import."""
from bertexp.util.demo_data import main

if __name__ == "__main__":
  main()
