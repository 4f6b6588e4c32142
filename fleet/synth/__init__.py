"""`fleet synth`: run the stack program under Pulumi's mocks (engine) and price the fleet (cost)."""
