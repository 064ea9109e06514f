"""The ReAct runtime: the loop, its events and hook points, its tools, the process services."""
