"""The package's version, a module of its own: the modules that print or record it import it
from here, so that none of them imports the package's ``__init__`` (which serves the notebook
API lazily, an import of the commands and reports that would otherwise close a circle)."""

__version__ = "0.1.0"
