"""sentcl models inside other frameworks' evaluation loops (each an optional extra): ``mteb`` (its
``EncoderProtocol``). No room of the library imports this package; the CLI and users do."""
