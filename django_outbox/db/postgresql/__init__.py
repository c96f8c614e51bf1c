"""PostgreSQL, the production database: SKIP LOCKED claims, LISTEN/NOTIFY wake-ups."""
