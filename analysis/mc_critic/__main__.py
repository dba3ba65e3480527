import sys

from analysis.mc_critic.cli import main

sys.exit(main())
