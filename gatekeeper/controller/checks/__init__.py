"""The loops of the Kueue AdmissionCheck controllers the gatekeeper serves."""
