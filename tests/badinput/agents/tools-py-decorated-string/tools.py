from toren import tool

GREETING = tool("hello")
