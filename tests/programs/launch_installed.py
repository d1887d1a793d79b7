"""A launcher for an installed training library: `launch_installed.py SITE_PACKAGES_DIR`."""
import site
import sys

site.addsitedir(sys.argv[1])

from ddptrain.train import main  # noqa: E402

main()
