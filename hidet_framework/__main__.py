"""``python -m hidet_framework ...`` runs the same CLI as the ``hidet-framework`` script."""
from hidet_framework.cli import main

if __name__ == "__main__":
    main()
