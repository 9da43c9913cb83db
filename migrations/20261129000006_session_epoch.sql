-- A password change ends the user's other browser sessions: a session signed in before this moment
-- is no longer accepted (the session that made the change is re-stamped). NULL: never changed.
-- API tokens are unaffected.
ALTER TABLE users ADD COLUMN sessions_valid_after timestamptz;
