"""hidet-plugin-example: a small third-party-style plugin for hidet-framework.

It is installed like any external plugin (its own distribution, one entry point in
the ``hidet_framework`` group) to prove discovery, and will contribute an extra matmul
template that competes with the bundled ones in the tuner. Its hook implementations
arrive with that issue.
"""
