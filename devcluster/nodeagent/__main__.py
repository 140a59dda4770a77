"""python -m devcluster.nodeagent --kubeconfig ... --node-name ... (see agent.parse_args)."""
import sys

from .agent import main

sys.exit(main())
