import sys
from pathlib import Path

# The payload runs from its own directory on a host; tests import it the same way.
sys.path.insert(0, str(Path(__file__).parent))
