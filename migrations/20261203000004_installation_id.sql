-- Who this installation is: a random id made once, here, and never changed. Every container gpuq
-- creates carries it (label org.gpuq.installation), and a runner settles only the containers of
-- its own installation, so two installations (each its own database) on one dockerd leave each
-- other's jobs alone. Nodes of one cluster share the database, so they share the id.
INSERT INTO settings (key, value)
VALUES ('installation_id', to_jsonb(gen_random_uuid()::text))
ON CONFLICT (key) DO NOTHING;
