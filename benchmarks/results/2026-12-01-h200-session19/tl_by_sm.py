"""Session 19: which multiprocessors the slow A-part blocks (more than 23 us after the inversion) ran on,
call by call, and the median time after the inversion by multiprocessor. Usage: python3 tl_by_sm.py file.csv ..."""
import csv,sys,collections
import numpy as np
for f in sys.argv[1:]:
    rows=list(csv.DictReader(open(f)))
    nseg=int(rows[0]['nseg'])
    calls=collections.defaultdict(list)
    for r in rows: calls[int(r['call'])].append(r)
    print(f)
    bysm=collections.defaultdict(list)
    for c,rs in sorted(calls.items()):
        v=[(int(r['smid']), int(r['segment']), float(r['exit'])-float(r['inv'])) for r in rs if int(r['segment'])>0]
        slow=sorted(s for s,g,t in v if t>23); fast=sorted(s for s,g,t in v if t<=23)
        for s,g,t in v: bysm[s].append(t)
        if c<3 or c==8: print(' call',c,'slow sms',slow[:40], '... n',len(slow))
    ks=sorted(bysm)
    print(' per-SM median:', ' '.join('%d:%.0f'%(k,np.median(bysm[k])) for k in ks))
