"""Chat in the browser: conversations, the WebSocket consumer, its routes, pages, fragments and meter."""
