/*
 * reshard_fence: the fence's optional C accelerator (see README.md).
 *
 * A fenced table's row triggers call reshard.fence_accel('<ident>', '<key
 * column>', '<key type>') instead of the generated plpgsql function
 * reshard.<ident>(). This function hashes the row's key as ring.TokenSQL does
 * and looks the token up in the ranges that function compiles (read from its
 * head comment, "fenced token ranges {...}", which reshard generates from the
 * same registry row as its body). A token outside them returns the row at
 * once: no plpgsql call. A token inside them, a NULL key, a key type it does
 * not hash, or a function it cannot read is handed to the plpgsql function
 * with the same trigger data, which tests exactly and raises the fence's
 * error: so the accelerator refuses nothing the plpgsql function would let
 * pass, and its errors are the plpgsql function's own.
 *
 * When does a session use new ranges? A call looks the plpgsql function's
 * pg_proc row up in the catalog cache and rereads the ranges when its xmin or
 * ctid changed: the check plpgsql itself makes before running a function, so
 * a fence change (CREATE OR REPLACE FUNCTION) reaches the accelerator exactly
 * when it would reach the plpgsql function. The look is skipped while the
 * backend has processed no invalidation of a pg_proc row since the last one
 * (a catalog cache callback counts them): the catalog cache cannot have
 * changed in between. That skip, and hashing a key an UPDATE keeps once
 * instead of twice, took 377 instructions off the 8,117 the accelerated fence
 * added to a single-row UPDATE (callgrind; 5,914 of them are PostgreSQL's
 * own for any BEFORE ROW trigger, see docs/benchmarks.md).
 */
#include "postgres.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/inval.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(reshard_fence_accel);

#define KIND_SLOW 0				/* hand every row to the plpgsql function */
#define KIND_INT 1				/* int2, int4, int8: hashint8extended */
#define KIND_TEXT 2				/* text, varchar: hashtextextended */
#define KIND_UUID 3				/* uuid: uuid_hash_extended */

typedef struct Entry
{
	Oid			tgoid;			/* hash key: the trigger */
	char		args[3][NAMEDATALEN];	/* the trigger's arguments, as cached */
	Oid			relid;
	AttrNumber	attnum;			/* the key column, 0 until resolved */
	int			kind;
	Oid			fn;				/* reshard.<ident>(), InvalidOid until found */
	TransactionId xmin;			/* of fn's pg_proc row when ranges were read */
	ItemPointerData tid;
	uint64		checked;		/* generation when fn's row was last looked up */
	int			n;				/* ranges read; -1: unreadable, always slow */
	int64	   *lo;				/* closed ranges [lo[i], hi[i]], sorted */
	int64	   *hi;
} Entry;

static HTAB *entries = NULL;

/*
 * generation counts the invalidations of pg_proc rows (and resets of the
 * caches) this backend has processed: proc_inval, the catalog cache's
 * callback for pg_proc, bumps it. Those are the only moments a lookup of a
 * fence function's row in the catalog cache can find another row than it
 * did, so an entry checked at the current generation skips the lookup.
 */
static uint64 generation = 1;

static void
proc_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	generation++;
}

/*
 * lookup finds reshard.<ident><suffix>() in the catalog, without the USAGE
 * check on the schema a name lookup makes: the application's role, whose
 * write fires the trigger, need not have it (a trigger calls its plpgsql
 * function by OID, which needs none either).
 */
static Oid
lookup(const char *ident, const char *suffix)
{
	char		name[NAMEDATALEN];
	Oid			nsp = get_namespace_oid("reshard", true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	snprintf(name, sizeof(name), "%s%s", ident, suffix);
	return GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum(name),
						   PointerGetDatum(buildoidvector(NULL, 0)), ObjectIdGetDatum(nsp));
}

static bool
parse_bound(const char **p, bool *empty, int64 *v)
{
	char	   *end;

	if (**p == ',' || **p == ')' || **p == ']')
	{
		*empty = true;
		return true;
	}
	errno = 0;
	*v = strtoll(*p, &end, 10);
	if (end == *p || errno != 0)
		return false;
	*empty = false;
	*p = end;
	return true;
}

/*
 * read_ranges parses the "fenced token ranges {...}" of a generated fence
 * function's source into e; e->n = -1 when the source holds none or they do
 * not parse (the accelerator then hands every row to the function).
 */
static void
read_ranges(Entry *e, const char *src)
{
	const char *tag = "fenced token ranges {";
	const char *p = strstr(src, tag);
	int			cap = 16,
				n = 0;
	int64	   *lo,
			   *hi;

	if (e->lo)
		pfree(e->lo);
	if (e->hi)
		pfree(e->hi);
	e->lo = e->hi = NULL;
	e->n = -1;
	if (p == NULL)
		return;
	p += strlen(tag);
	lo = MemoryContextAlloc(TopMemoryContext, cap * sizeof(int64));
	hi = MemoryContextAlloc(TopMemoryContext, cap * sizeof(int64));
	while (*p != '}')
	{
		char		open = *p++,
					close;
		bool		lempty,
					hempty;
		int64		a = 0,
					b = 0;

		if ((open != '[' && open != '(') || !parse_bound(&p, &lempty, &a) || *p++ != ',' || !parse_bound(&p, &hempty, &b))
			goto bad;
		close = *p++;
		if (close != ')' && close != ']')
			goto bad;
		if (n == cap)
		{
			cap *= 2;
			lo = repalloc(lo, cap * sizeof(int64));
			hi = repalloc(hi, cap * sizeof(int64));
		}
		if (lempty)
			lo[n] = PG_INT64_MIN;
		else if (open == '[')
			lo[n] = a;
		else if (a == PG_INT64_MAX)
			goto bad;
		else
			lo[n] = a + 1;
		if (hempty)
			hi[n] = PG_INT64_MAX;
		else if (close == ']')
			hi[n] = b;
		else if (b == PG_INT64_MIN)
			goto bad;
		else
			hi[n] = b - 1;
		if (lo[n] > hi[n] || (n > 0 && lo[n] <= hi[n - 1]))
			goto bad;
		n++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			goto bad;
	}
	e->lo = lo;
	e->hi = hi;
	e->n = n;
	return;
bad:
	pfree(lo);
	pfree(hi);
}

/* fenced reports whether tok lies in e's ranges (binary search). */
static bool
fenced(Entry *e, int64 tok)
{
	int			l = 0,
				h = e->n;

	while (l < h)
	{
		int			m = l + (h - l) / 2;

		if (e->hi[m] < tok)
			l = m + 1;
		else
			h = m;
	}
	return l < e->n && e->lo[l] <= tok;
}

/* token hashes key d (not NULL) of e's column as ring.TokenSQL does. */
static int64
token(Entry *e, TriggerData *td, Datum d)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(td->tg_relation), e->attnum - 1);
	int64		v;

	switch (e->kind)
	{
		case KIND_INT:
			v = att->atttypid == INT8OID ? DatumGetInt64(d) : att->atttypid == INT4OID ? (int64) DatumGetInt32(d) : (int64) DatumGetInt16(d);
			return DatumGetInt64(DirectFunctionCall2(hashint8extended, Int64GetDatum(v), Int64GetDatum(0)));
		case KIND_TEXT:
			return DatumGetInt64(DirectFunctionCall2Coll(hashtextextended, att->attcollation, d, Int64GetDatum(0)));
		default:				/* KIND_UUID: resolve sets no other kind */
			return DatumGetInt64(DirectFunctionCall2(uuid_hash_extended, d, Int64GetDatum(0)));
	}
}

/*
 * passes reports whether the keys of row and, for an UPDATE, of its old
 * version old may pass without the function: neither NULL nor fenced. A key
 * an UPDATE keeps (the same bytes) is hashed once.
 */
static bool
passes(Entry *e, TriggerData *td, HeapTuple row, HeapTuple old)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	Form_pg_attribute att = TupleDescAttr(desc, e->attnum - 1);
	bool		isnull,
				oldnull;
	Datum		d = heap_getattr(row, e->attnum, desc, &isnull),
				od;

	if (isnull || fenced(e, token(e, td, d)))
		return false;
	if (old == NULL)
		return true;
	od = heap_getattr(old, e->attnum, desc, &oldnull);
	if (oldnull)
		return false;
	if (datumIsEqual(d, od, att->attbyval, att->attlen))
		return true;
	return !fenced(e, token(e, td, od));
}

/* resolve finds the key column and how to hash it. */
static void
resolve(Entry *e, TriggerData *td)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	int			att = SPI_fnumber(desc, e->args[1]);
	Oid			typ;

	e->kind = KIND_SLOW;
	e->attnum = 0;
	if (att <= 0)
		return;
	e->attnum = att;
	typ = TupleDescAttr(desc, att - 1)->atttypid;
	if (strcmp(e->args[2], "bigint") == 0 && (typ == INT2OID || typ == INT4OID || typ == INT8OID))
		e->kind = KIND_INT;
	else if (strcmp(e->args[2], "text") == 0 && (typ == TEXTOID || typ == VARCHAROID))
		e->kind = KIND_TEXT;
	else if (strcmp(e->args[2], "uuid") == 0 && typ == UUIDOID)
		e->kind = KIND_UUID;
}

/* slow hands the row to the generated plpgsql function. */
static Datum
slow(Entry *e, TriggerData *td, FunctionCallInfo outer)
{
	Oid			fn = TRIGGER_FIRED_BY_DELETE(td->tg_event) ? lookup(e->args[0], "_delete") : e->fn;
	FmgrInfo	flinfo;
	Datum		result;

	LOCAL_FCINFO(fcinfo, 0);

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("reshard fence: %s on %s.%s refused: its fence function reshard.%s%s() is missing",
						TRIGGER_FIRED_BY_DELETE(td->tg_event) ? "DELETE" : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? "UPDATE" : "INSERT",
						get_namespace_name(RelationGetNamespace(td->tg_relation)), RelationGetRelationName(td->tg_relation),
						e->args[0], TRIGGER_FIRED_BY_DELETE(td->tg_event) ? "_delete" : ""),
				 errhint("run reshard topology check --repair: it compiles the table's fence again")));
	fmgr_info(fn, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, 0, InvalidOid, (Node *) td, NULL);
	result = FunctionCallInvoke(fcinfo);
	outer->isnull = fcinfo->isnull;
	return result;
}

Datum
reshard_fence_accel(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Trigger    *tg;
	Entry	   *e;
	bool		found;
	HeapTuple	proc;
	int			i;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BEFORE(td->tg_event))
		elog(ERROR, "reshard.fence_accel: not called as a BEFORE ROW trigger");
	tg = td->tg_trigger;
	if (tg->tgnargs != 3)
		elog(ERROR, "reshard.fence_accel: trigger %s takes 3 arguments (fence identity, key column, key type), not %d", tg->tgname, tg->tgnargs);
	if (entries == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(Entry);
		entries = hash_create("reshard fence accelerator", 64, &ctl, HASH_ELEM | HASH_BLOBS);
		CacheRegisterSyscacheCallback(PROCOID, proc_inval, (Datum) 0);
	}
	e = hash_search(entries, &tg->tgoid, HASH_ENTER, &found);
	if (!found)
	{
		memset(((char *) e) + sizeof(Oid), 0, sizeof(Entry) - sizeof(Oid));
		e->n = -1;
	}
	/* A trigger replaced in place keeps its OID: compare what it says. */
	for (i = 0; i < 3; i++)
	{
		if (strncmp(e->args[i], tg->tgargs[i], NAMEDATALEN) != 0)
		{
			strlcpy(e->args[0], tg->tgargs[0], NAMEDATALEN);
			strlcpy(e->args[1], tg->tgargs[1], NAMEDATALEN);
			strlcpy(e->args[2], tg->tgargs[2], NAMEDATALEN);
			e->attnum = 0;
			e->fn = InvalidOid;
			e->n = -1;
			e->xmin = InvalidTransactionId;
			e->checked = 0;
			break;
		}
	}
	if (e->relid != RelationGetRelid(td->tg_relation) || e->attnum == 0 ||
		strcmp(NameStr(TupleDescAttr(RelationGetDescr(td->tg_relation), e->attnum - 1)->attname), e->args[1]) != 0)
	{
		e->relid = RelationGetRelid(td->tg_relation);
		resolve(e, td);
	}

	/*
	 * The generated function's catalog row, as plpgsql checks it: unless no
	 * pg_proc invalidation was processed since the last look (generation is
	 * read first, so one processed during the look brings another).
	 */
	if (e->checked != generation || !OidIsValid(e->fn))
	{
		uint64		g = generation;

		proc = OidIsValid(e->fn) ? SearchSysCache1(PROCOID, ObjectIdGetDatum(e->fn)) : NULL;
		if (!HeapTupleIsValid(proc))
		{
			e->fn = lookup(e->args[0], "");
			proc = OidIsValid(e->fn) ? SearchSysCache1(PROCOID, ObjectIdGetDatum(e->fn)) : NULL;
			e->n = -1;
			e->xmin = InvalidTransactionId;
		}
		if (!HeapTupleIsValid(proc))
		{
			e->checked = 0;
			return slow(e, td, fcinfo); /* refuses: the function is missing */
		}
		if (e->xmin != HeapTupleHeaderGetRawXmin(proc->t_data) || !ItemPointerEquals(&e->tid, &proc->t_self) || e->n < 0)
		{
			bool		isnull;
			Datum		src = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_prosrc, &isnull);

			if (isnull)
				e->n = -1;
			else
			{
				char	   *s = TextDatumGetCString(src);

				read_ranges(e, s);
				pfree(s);
			}
			e->xmin = HeapTupleHeaderGetRawXmin(proc->t_data);
			e->tid = proc->t_self;
		}
		ReleaseSysCache(proc);
		e->checked = g;
	}

	/* A row that passes is returned unchanged. */
	if (e->kind != KIND_SLOW && e->n >= 0)
	{
		if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		{
			if (passes(e, td, td->tg_newtuple, td->tg_trigtuple))
				return PointerGetDatum(td->tg_newtuple);
		}
		else if (passes(e, td, td->tg_trigtuple, NULL))
			return PointerGetDatum(td->tg_trigtuple);
	}
	return slow(e, td, fcinfo);
}
