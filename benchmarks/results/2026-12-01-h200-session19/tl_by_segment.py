"""Session 19: median time after the inversion (us) of each A-part block, by head and segment, from
VLA_CP_TIMELINE_DUMP CSVs (the timeline build). Usage: python3 tl_by_segment.py file.csv ..."""
import csv,sys,collections
import numpy as np
for f in sys.argv[1:]:
    rows=list(csv.DictReader(open(f)))
    d=collections.defaultdict(list)
    for r in rows:
        blk=int(r['block']); seg=int(r['segment']); nseg=int(r['nseg'])
        d[(blk//nseg,seg)].append(float(r['exit'])-float(r['inv']))
    nseg=int(rows[0]['nseg'])
    print(f)
    for h in range(4):
        print(' h%d'%h,' '.join('%4.1f'%np.median(d[(h,s)]) for s in range(nseg)))
