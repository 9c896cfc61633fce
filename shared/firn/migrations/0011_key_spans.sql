-- Where a change file's keys lie, finer than min_key/max_key (firn.model.keyspans):
-- up to eight [first, last] key pairs, split at the widest gaps between its keys, so
-- a fold reads only the base files its keys meet (an event log's commit: new ids past
-- the base and a few late updates). NULL: the file's range is all there is.
ALTER TABLE data_file ADD COLUMN key_spans jsonb;
