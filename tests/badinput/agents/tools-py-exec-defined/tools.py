exec("def spread(*parts):\n    return parts\n")
