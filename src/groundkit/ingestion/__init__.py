"""Loading sources and cutting them into chunks with exact offsets."""
