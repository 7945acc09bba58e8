#!/usr/bin/env python3
"""A dynamic inventory script, as a cloud plugin or CMDB would provide."""

import json
import sys

if "--host" in sys.argv:
    print("{}")
else:
    print(
        json.dumps(
            {
                "mpi_nodes": {"hosts": ["d1", "d2"], "vars": {"mpi_slots": 2}},
                "_meta": {"hostvars": {"d2": {"mpi_slots": 6}}},
            }
        )
    )
