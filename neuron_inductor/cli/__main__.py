"""``python -m neuron_inductor.cli``: same as the ``neuron-inductor`` script."""
from neuron_inductor.cli import main

raise SystemExit(main())
