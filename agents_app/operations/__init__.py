"""What operators do beside the runtime: staff actions on any user's sessions (`services`),
the expired-session sweep (`reaping`) and the first start's superuser (`first_run`)."""
