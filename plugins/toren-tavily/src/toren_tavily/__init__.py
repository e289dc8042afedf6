"""toren-tavily: the ``web_search`` tool, through the Tavily search API."""
