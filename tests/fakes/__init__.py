"""Local fakes of cloud APIs for tests: real servers speaking the real wire format.

`compute_api.FakeCompute` is a Compute Engine v1 REST server on 127.0.0.1 that the real
google-cloud-compute client talks to; `fixtures` holds the pytest fixtures other tests import.
"""
