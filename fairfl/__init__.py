"""fairfl: fair federated learning rules as Flower strategies.

Subpackages
-----------
strategies
    One module per aggregation rule, each a Flower Message-API strategy.
server
    The ServerApp: strategy from run config, fairness metrics, results files.
client
    The ClientApp and the helpers other ClientApps can call.
data, models
    Data sets, partitioners and the model zoo the ClientApp trains.
simulation
    The in-process runner: the same strategy and ClientApp on an in-memory Grid.
"""

__version__ = "0.1.0"
