-- Whether a card is seen by its node's inventory is not an admin's decision: it gets its own
-- column, and `state` (online / draining / offline) now belongs to admins alone and holds until an
-- admin changes it. Before this, the inventory wrote `offline` for cards it no longer saw and
-- turned any card it saw back `online` (undoing an admin's offline within one refresh), so an
-- `offline` card today is one the inventory does not see: it becomes `online` and not present,
-- and the next refresh marks it present again if its node sees it.
ALTER TABLE gpus ADD COLUMN present boolean NOT NULL DEFAULT true;
UPDATE gpus SET present = false, state = 'online' WHERE state = 'offline';
