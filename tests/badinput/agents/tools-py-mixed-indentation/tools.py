def shout(text: str) -> str:
    if text:
	return text.upper()
    return text
