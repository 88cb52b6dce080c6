# Start+commit cycles through the API, for measure.sh: python3 drive.py PORT CLIENTS CYCLES short|long
# (task w07 / dataset w.d07, or task load_dws_order_detail_region_07 / dataset dws.order_detail_region_07).
import http.client, json, sys, threading, datetime
port=int(sys.argv[1]); clients=int(sys.argv[2]); cycles=int(sys.argv[3]); long_=sys.argv[4]=='long'
def names(c):
    return (f"load_dws_order_detail_region_{c:02}", f"dws.order_detail_region_{c:02}") if long_ else (f"w{c:02}", f"w.d{c:02}")
def run(c):
    conn=http.client.HTTPConnection('127.0.0.1',port)
    task,ds=names(c)
    d0=datetime.date(2300,1,1)
    for n in range(cycles):
        dt=(d0+datetime.timedelta(days=n)).isoformat(); p=f"dt={dt}"
        conn.request('POST','/v1/batches',json.dumps({"task":task,"dataset":ds,"dt":dt,"partitions":[p]}),{'content-type':'application/json'})
        r=conn.getresponse(); b=json.loads(r.read()); assert r.status==201,(r.status,b)
        conn.request('POST',f"/v1/batches/{b['batch_id']}/commit",json.dumps({"marker":f"hdfs://warehouse/{ds}/{p}/_SUCCESS","partitions":[{"partition":p,"rows_written":1000,"row_count":1000}]}),{'content-type':'application/json'})
        r=conn.getresponse(); x=r.read(); assert r.status==200,(r.status,x)
ts=[threading.Thread(target=run,args=(c,)) for c in range(clients)]
[t.start() for t in ts]; [t.join() for t in ts]
