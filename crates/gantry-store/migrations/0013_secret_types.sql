-- A secret's type: `value` (an opaque string, as before), or `s3`, `http`, `image` (a JSON
-- object of credential fields, checked at write). Listed, so it is not sealed.
ALTER TABLE secrets ADD COLUMN kind TEXT NOT NULL DEFAULT 'value';
