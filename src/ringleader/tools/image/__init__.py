"""`ringleader image`: prepare a training image for ringleader (`setup`, run in its Dockerfile)
and check what an image has for each distribution (`check`)."""
