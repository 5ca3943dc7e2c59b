"""The fleet room: N replicas (each today's single-server replay, unchanged) behind a router,
on one virtual clock (docs/architecture.md, DESIGN.md "Fleets")."""
