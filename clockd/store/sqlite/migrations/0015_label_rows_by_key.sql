-- clockd embedded store, schema 0015: no index of schedule_labels by schedule id, as in
-- the PostgreSQL store's 0015 (where it cost a create 5-6 us of database time). A change
-- deletes its schedule's label rows by the primary key, from the definition of the
-- version it replaces (schedule_labels_delete); the two stores keep one way of doing it.
DROP INDEX IF EXISTS schedule_labels_schedule;
