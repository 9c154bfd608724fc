"""The per-pass model: what one pass knows besides the deployment (options, resolved cluster facts,
condition values). The bottom layer above app.api, app.vocab and app.world; see docs/architecture.md."""
