workflow = "plan, then write"
