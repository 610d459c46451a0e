-- RFC 0008: the fence trigger's JSON form (several agents per transaction), checked with
-- psql -h 127.0.0.1 -d test -q -f rfcs/0008/fence_json.sql  (temporary tables only; expected: two
-- ERRORs, a stale token and an agent missing from the fence, then count 2)
CREATE TEMP TABLE leases (agent_id TEXT PRIMARY KEY, node TEXT, token BIGINT, expires_at TIMESTAMPTZ);
CREATE TEMP TABLE unfenced_types (type TEXT PRIMARY KEY);
CREATE TEMP TABLE ev (agent_id TEXT, type TEXT);
CREATE FUNCTION pg_temp.holon_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE f JSONB := nullif(current_setting('holon.fence', true), '')::jsonb; l leases%ROWTYPE;
BEGIN
  IF EXISTS (SELECT 1 FROM unfenced_types WHERE type = NEW.type) THEN RETURN NEW; END IF;
  IF f IS NULL OR NOT (f -> 'tokens') ? NEW.agent_id THEN
    RAISE EXCEPTION 'fencing: % for agent % needs the agent''s lease (no fence for it in this transaction)',
      NEW.type, NEW.agent_id USING ERRCODE = 'HLF01';
  END IF;
  SELECT * INTO l FROM leases WHERE agent_id = NEW.agent_id;
  IF NOT FOUND OR l.node <> f ->> 'node' OR l.token <> (f -> 'tokens' ->> NEW.agent_id)::bigint
     OR l.expires_at <= clock_timestamp() THEN
    RAISE EXCEPTION 'fencing: node % no longer holds the lease of agent %', f ->> 'node', NEW.agent_id
      USING ERRCODE = 'HLF01';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER f BEFORE INSERT ON ev FOR EACH ROW EXECUTE FUNCTION pg_temp.holon_fence();
INSERT INTO leases VALUES ('a1','n1',3, now() + interval '1 h'), ('a2','n1',7, now() + interval '1 h');
BEGIN; SELECT set_config('holon.fence', '{"node":"n1","tokens":{"a1":3,"a2":7}}', true); INSERT INTO ev VALUES ('a1','t'),('a2','t'); COMMIT;
BEGIN; SELECT set_config('holon.fence', '{"node":"n1","tokens":{"a1":1}}', true); INSERT INTO ev VALUES ('a1','t'); COMMIT;
BEGIN; SELECT set_config('holon.fence', '{"node":"n1","tokens":{"a1":3}}', true); INSERT INTO ev VALUES ('a2','t'); COMMIT;
SELECT count(*) FROM ev;
