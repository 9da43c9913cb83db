-- A job uid, once given, is never given to anyone else (issue 25). Files a job wrote on a shared
-- folder belong to its uid long after an admin moved its owner to a site uid; handing the freed
-- uid to the next new user would give them those files. Every uid a user ever held (allocated
-- from the range or set by an admin) is recorded here, with whom it was given to, and the table
-- is append-only: allocation takes the lowest uid of the range that was never given.
CREATE TABLE job_uids_issued (
    uid       integer PRIMARY KEY CHECK (uid > 0),
    user_id   uuid NOT NULL REFERENCES users (id),
    issued_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO job_uids_issued (uid, user_id) SELECT job_uid, id FROM users WHERE job_uid IS NOT NULL;
CREATE TRIGGER job_uids_issued_append_only BEFORE UPDATE OR DELETE ON job_uids_issued
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
