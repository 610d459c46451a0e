"""The long-lived host: agents, schedules, timers, shutdown and restart (RFC 0005)."""
