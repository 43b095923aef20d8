"""`aows plan`: what a run will cost before it starts, and beside what it cost after (docs/planning.md)."""
