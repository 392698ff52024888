{% raw %}/* The index's script: it reads the page's JSON, draws from it and sets every string it shows
   through textContent, an Option's text or setAttribute on a fixed attribute: no innerHTML, no eval.
   Maps keyed by data (run ids, model names) and by the URL fragment have no prototype (dict()), so
   a run or a fragment named __proto__ or constructor is a key like any other. */
(function(){
'use strict';
var D=JSON.parse(document.getElementById('coinflip-data').textContent);
function dict(){return Object.create(null)}
var RUNS=D.runs,M=D.metrics,EX=dict(),COLORS=['#3558d6','#d6453d','#2a9d5b','#8a63d2','#e08a00','#00838f','#c2185b','#6d7b2c','#5d4037','#1e88e5','#7b1fa2','#546e7a'];
D.extras.forEach(function(e){EX[e[0]]=e[1]});
var TAGC=dict();D.datasets.forEach(function(d,i){TAGC[d.tag]=COLORS[i%COLORS.length]});
var BYID=dict();RUNS.forEach(function(r,i){r.i=i;BYID[r.id]=r});
var PAIRS=dict();D.pairs.forEach(function(p){PAIRS[p.a+','+p.b]=p});
var DEF={sort:'f1_score',dir:'desc',model:'',data:'',status:'',q:'',sel:'',a:'',b:''};
var S={},OPEN=dict();
function $(id){return document.getElementById(id)}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;if(text!=null)e.textContent=String(text);return e}
function svg(tag,attrs,text){var e=document.createElementNS('http://www.w3.org/2000/svg',tag);for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!=null)e.textContent=String(text);return e}
function f3(v){return v==null?'\u2014':v.toFixed(3)}
function pct(v){return v==null?'\u2014':(100*v).toFixed(1)+'%'}
function int(v){return v==null?'\u2014':String(Math.round(v))}
function cut(s,n){return s.slice(0,n).replace(/[\uD800-\uDBFF]$/,'')}// never half an emoji: slice counts UTF-16 units
function g(v){return v==null?'\u2014':(Math.abs(v)>=100?v.toFixed(0):Math.abs(v)>=1?v.toFixed(2):v.toPrecision(2))}
function readHash(){var p=new URLSearchParams(location.hash.replace(/^#/,''));S={};for(var k in DEF)S[k]=p.has(k)?p.get(k):DEF[k];if(S.dir!=='asc')S.dir='desc'}
function writeHash(){var p=new URLSearchParams();for(var k in DEF)if(S[k]!==DEF[k])p.set(k,S[k]);try{history.replaceState(null,'','#'+p.toString())}catch(e){}}
function label(r){return r.model+' \u00b7 '+r.run}
// the columns that fit 1280 px; the other metrics, template, repeats and arithmetic are in a run's details
var MAIN_M=['f1_score','accuracy'],MAIN_X=['forced_accuracy','auroc'];
var COLS=[{k:'sel',t:''},{k:'rank',t:'#',n:1,up:1},{k:'model',t:'model'},{k:'run',t:'run / started'},{k:'data',t:'data'},
 {k:'few_shot',t:'shots',n:1},{k:'samples',t:'samples',n:1}];
M.forEach(function(m){if(MAIN_M.indexOf(m)>=0)COLS.push({k:m,t:m==='f1_score'?'F1':m,n:1,m:1})});
D.extras.forEach(function(e){if(MAIN_X.indexOf(e[0])>=0)COLS.push({k:e[0],t:e[1],n:1,x:1})});
COLS.push({k:'invalid_rate',t:'invalid',n:1},{k:'errors',t:'errors',n:1},{k:'status',t:'status'});
function val(r,k){if(M.indexOf(k)>=0)return r.m[k][0];if(k in EX)return r.extra[k];if(k==='data')return r.tag;if(k==='status')return r.complete?'complete':'incomplete';return r[k]}
function cmp(a,b){var k=S.sort,x=val(a,k),y=val(b,k);if(x==null&&y==null)return a.i-b.i;if(x==null)return 1;if(y==null)return -1;
 var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y),undefined,{numeric:true});if(c===0)return a.i-b.i;return S.dir==='asc'?c:-c}
function visible(){var q=S.q.toLowerCase();return RUNS.filter(function(r){
 if(S.model&&r.model!==S.model)return false;if(S.data&&r.data.key!==S.data)return false;
 if(S.status&&(r.complete?'complete':'incomplete')!==S.status)return false;
 if(q&&[r.model,r.run,r.id,r.template,r.data.label,r.tag,r.date,r.complete?'complete':'incomplete'].join(' ').toLowerCase().indexOf(q)<0)return false;return true}).sort(cmp)}
// #sel holds run ids joined by commas: a comma (or %) in an id is written %2C (%25)
function sels(){return S.sel?S.sel.split(',').map(function(x){return x.replace(/%(25|2C)/gi,function(m){return m==='%25'?'%':','})}):[]}
function selected(view){var ids=sels();var out=ids.map(function(id){return BYID[id]}).filter(Boolean);return out.length?out:view.slice(0,5)}
function options(select,items,value){select.textContent='';items.forEach(function(it){select.appendChild(new Option(it[1],it[0]))});select.value=value}
function head(){var tr=el('tr');COLS.forEach(function(c){var th=el('th',S.sort===c.k?'on':'',c.t+(S.sort===c.k?(S.dir==='asc'?' \u25b2':' \u25bc'):''));
 th.setAttribute('data-k',c.k);if(c.k!=='sel'){th.tabIndex=0;th.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();th.click()}});
 th.addEventListener('click',function(){if(S.sort===c.k)S.dir=S.dir==='asc'?'desc':'asc';else{S.sort=c.k;S.dir=c.n&&!c.up?'desc':'asc'}update();var t=document.querySelector('#board th[data-k="'+c.k+'"]');if(t)t.focus()})}tr.appendChild(th)});
 var t=$('board').tHead;t.textContent='';t.appendChild(tr)}
function cell(tr,text,cls,title){var td=el('td',cls,text);if(title)td.setAttribute('title',title);tr.appendChild(td);return td}
function row(r,sel){var tr=el('tr','run'+(r.complete?'':' incomplete'));tr.setAttribute('data-id',r.id);tr.setAttribute('data-model',r.model);
 var td=el('td'),box=el('input');box.type='checkbox';box.checked=sel;box.addEventListener('change',function(){var ids=sels();
  if(box.checked)ids.push(r.id);else ids=ids.filter(function(x){return x!==r.id});S.sel=ids.map(function(x){return x.replace(/%/g,'%25').replace(/,/g,'%2C')}).join(',');update()});td.appendChild(box);tr.appendChild(td);
 cell(tr,r.rank==null?'\u2013':(r.tied?'=':'')+r.rank,'num',r.rank==null?'not ranked: incomplete':'rank '+r.rank+(r.tied?' (tied: equal F1)':'')+' of '+r.rank_of+' complete runs on '+r.tag+(r.subset?' ('+r.subset+')':'')+' with '+int(r.samples)+' samples in '+r.compat+' arithmetic');
 cell(tr,r.model.length>60?r.model.slice(0,59)+'\u2026':r.model,'model',r.model.length>60?r.model:'');
 var rc=el('td','runc'),more=el('button','more',OPEN[r.id]?'\u25be':'\u25b8');more.setAttribute('title','details');more.addEventListener('click',function(){OPEN[r.id]=!OPEN[r.id];table()});rc.appendChild(more);
 if(r.href){var a=el('a',null,r.run);a.setAttribute('href',r.href);rc.appendChild(a)}else rc.appendChild(document.createTextNode(r.run));
 if(r.id!==r.run&&r.id!=='.')rc.appendChild(el('small',null,r.id));rc.appendChild(el('small','date',cut(r.date,16)));rc.setAttribute('title','started '+r.date);tr.appendChild(rc);
 var dc=el('td','datac');var tag=el('span','tag',r.tag);tag.style.background=TAGC[r.tag];dc.appendChild(tag);dc.appendChild(document.createTextNode(r.data.label));if(r.data.sha)dc.appendChild(el('small',null,'sha256 '+cut(r.data.sha,12)));dc.setAttribute('title',r.data.where+(r.data.sha?'\nsha256 '+r.data.sha:''));tr.appendChild(dc);
 cell(tr,int(r.few_shot),'num');cell(tr,int(r.samples),'num');
 M.forEach(function(m){if(MAIN_M.indexOf(m)<0)return;var v=r.m[m],c=cell(tr,f3(v[0]),'num m-'+m);if(v[1]!=null)c.appendChild(el('small',null,v[1].toFixed(2)+'\u2013'+v[2].toFixed(2)))});
 D.extras.forEach(function(e){if(MAIN_X.indexOf(e[0])>=0)cell(tr,f3(r.extra[e[0]]),'num x-'+e[0])});
 cell(tr,pct(r.invalid_rate),'num',r.invalid_reasons);cell(tr,int(r.errors),'num');
 cell(tr,r.complete?'complete':'incomplete','st-'+(r.complete?'complete':'incomplete'),r.warnings.join('\n'));
 return tr}
function details(r){var tr=el('tr','details'),td=el('td');td.colSpan=COLS.length;
 var lines=[['path',r.id],['started',r.date],['template',r.template_text+(r.template_hash?' ('+r.template_hash+')':'')],['questions',r.subset||'all of the data set'],['repeats',int(r.repeats)],['metric arithmetic',r.compat],['coinflip version',r.version||'\u2014']];
 M.forEach(function(m){if(MAIN_M.indexOf(m)<0){var v=r.m[m];lines.push([m,f3(v[0])+(v[1]!=null?' (95% '+v[1].toFixed(3)+'\u2013'+v[2].toFixed(3)+')':'')])}});
 D.extras.forEach(function(e){if(MAIN_X.indexOf(e[0])<0)lines.push([e[1],f3(r.extra[e[0]])])});
 lines=lines.concat([['invalid reasons',r.invalid_reasons||'\u2014'],['prompt tokens',int(r.ptok)],['completion tokens',int(r.ctok)]]).concat(r.warnings.map(function(w){return ['warning',w]})).concat(r.details);
 var t=el('table');lines.forEach(function(l){var x=el('tr');x.appendChild(el('th',null,l[0]));x.appendChild(el('td',null,l[1]));t.appendChild(x)});td.appendChild(t);tr.appendChild(td);return tr}
var VIEW=[],PAGE=100,LIMIT=PAGE;
function table(){var body=$('board').tBodies[0],frag=document.createDocumentFragment(),ids=sels();
 VIEW.slice(0,LIMIT).forEach(function(r){frag.appendChild(row(r,ids.indexOf(r.id)>=0));if(OPEN[r.id])frag.appendChild(details(r))});
 if(VIEW.length>LIMIT){var tr=el('tr','more'),td=el('td');td.colSpan=COLS.length;var b=el('button','more','show '+Math.min(PAGE,VIEW.length-LIMIT)+' more of the '+(VIEW.length-LIMIT)+' not drawn');
  b.addEventListener('click',function(){LIMIT+=PAGE;table()});td.appendChild(b);tr.appendChild(td);frag.appendChild(tr)}
 body.textContent='';body.appendChild(frag);
 $('shown').textContent=VIEW.length+' of '+RUNS.length+' runs match'+(VIEW.length>LIMIT?', the first '+LIMIT+' drawn':'');
 var tags=dict();VIEW.forEach(function(r){tags[r.tag]=1});var n=Object.keys(tags).length,m=$('mixed');
 m.hidden=n<2;m.textContent=n<2?'':'These rows come from '+n+' data sets ('+Object.keys(tags).sort().join(', ')+'): scores on different data are not comparable, and each rank counts only runs on its own data set and size. Pick one data set above to rank them together.'}
function chart(runs){var box=$('chart'),leg=$('legend');box.textContent='';leg.textContent='';
 var xs=dict();runs.forEach(function(r){for(var k in r.people)xs[k]=1});var keys=Object.keys(xs).map(Number).sort(function(a,b){return a-b});
 if(!runs.length||!keys.length){box.appendChild(el('p','meta','no accuracy by number of people in the drawn runs'));return}
 var W=560,H=290,L=44,R=16,T=12,B=40,lo=keys[0],hi=keys[keys.length-1],span=(hi-lo)||1;
 function sx(x){return keys.length===1?(L+W-R)/2:L+(W-L-R)*(x-lo)/span}function sy(y){return T+(H-T-B)*(1-Math.min(1,Math.max(0,y)))}
 var s=svg('svg',{width:W,height:H,role:'img','aria-label':'accuracy by number of people'});
 [0,0.25,0.5,0.75,1].forEach(function(t){s.appendChild(svg('line',{x1:L,x2:W-R,y1:sy(t),y2:sy(t),stroke:'#e2e5ea'}));s.appendChild(svg('text',{x:6,y:sy(t)+4},t.toFixed(2)))});
 keys.forEach(function(k){s.appendChild(svg('text',{x:sx(k)-4,y:H-22},k))});s.appendChild(svg('text',{x:W/2-50,y:H-6},'number of people'));
 runs.forEach(function(r,n){var c=COLORS[n%COLORS.length],pts=keys.filter(function(k){return r.people[k]&&r.people[k][0]!=null});
  var d=pts.map(function(k,i){return (i?'L':'M')+sx(k).toFixed(1)+','+sy(r.people[k][0]).toFixed(1)}).join(' ');
  if(d)s.appendChild(svg('path',{d:d,fill:'none',stroke:c,'stroke-width':2,'class':'line','data-id':r.id}));
  pts.forEach(function(k){var p=r.people[k];if(p[1]!=null)s.appendChild(svg('line',{x1:sx(k),x2:sx(k),y1:sy(p[2]),y2:sy(p[1]),stroke:c,'stroke-opacity':0.25,'stroke-width':3}));
   var dot=svg('circle',{cx:sx(k),cy:sy(p[0]),r:3.5,fill:c,'class':'point'});dot.appendChild(svg('title',{},label(r)+': '+k+' people, accuracy '+f3(p[0])+' ('+int(p[3])+' questions)'));s.appendChild(dot)});
  var item=el('span');var sw=el('i');sw.style.background=c;item.appendChild(sw);item.appendChild(document.createTextNode(label(r)+' ('+r.tag+')'));leg.appendChild(item)});
 box.appendChild(s)}
function unit(key,v){if(v==null)return '\u2014';if(key!=='lat')return Math.round(v)+' tokens';
 var ms=1000*v;return ms<10?ms.toFixed(2)+' ms':v<1?Math.round(ms)+' ms':v<100?v.toFixed(2)+' s':Math.round(v)+' s'}
function bars(id,runs,key){var box=$(id);box.textContent='';var rs=runs.filter(function(r){return r[key].p50!=null});
 if(!rs.length){box.appendChild(el('p','meta','not recorded'));return}
 var top=Math.max.apply(null,rs.map(function(r){return r[key].p90!=null?r[key].p90:r[key].p50}))||1,W=320,rowH=30,s=svg('svg',{width:'100%',viewBox:'0 0 '+W+' '+(rs.length*rowH+4),preserveAspectRatio:'xMinYMin meet'});
 rs.forEach(function(r,n){var q=r[key],y=n*rowH,c=COLORS[runs.indexOf(r)%COLORS.length];function sx(v){return 4+(W-80)*v/top}
  s.appendChild(svg('text',{x:4,y:y+10},cut(label(r),Math.floor(W/6.2))));s.appendChild(svg('rect',{x:4,y:y+13,width:Math.max(1,sx(q.p50)-4),height:9,fill:c,'fill-opacity':0.8}));
  if(q.p90!=null)s.appendChild(svg('line',{x1:sx(q.p50),x2:sx(q.p90),y1:y+17.5,y2:y+17.5,stroke:'#222'}));
  if(q.mean!=null)s.appendChild(svg('line',{x1:sx(q.mean),x2:sx(q.mean),y1:y+11,y2:y+24,stroke:'#222','stroke-width':2}));
  s.appendChild(svg('text',{x:W-72,y:y+21},unit(key,q.p50)));var tip=svg('title',{},label(r)+': p50 '+unit(key,q.p50)+', mean '+unit(key,q.mean)+', p90 '+unit(key,q.p90)+', p99 '+unit(key,q.p99));s.lastChild.appendChild(tip)});box.appendChild(s)}
function quote(p){return "'"+p.replace(/'/g,"'\\''")+"'"}
function pathOf(r){return r.id==='.'?D.work_dir:D.work_dir+'/'+r.id}
function pairView(view){var A=BYID[S.a]||view[0],pa=$('p-a'),pb=$('p-b'),out=$('pair');out.textContent='';
 if(!A){options(pa,[],'');options(pb,[],'');out.appendChild(el('p','meta','no runs'));return}
 var as=view.slice(0,LIMIT);if(as.indexOf(A)<0)as.unshift(A);options(pa,as.map(function(r){return [r.id,label(r)+' ('+r.tag+')']}),A.id);
 function paired(r){return PAIRS[A.i+','+r.i]||PAIRS[r.i+','+A.i]}function mate(r){return r!==A&&r.data.key===A.data.key}
 var mates=RUNS.filter(mate),near=view.filter(mate);
 var B=BYID[S.b];if(!B||mates.indexOf(B)<0)B=near.filter(paired)[0]||near[0]||mates[0];
 var bs=near.slice(0,LIMIT);if(B&&bs.indexOf(B)<0)bs.unshift(B);options(pb,bs.map(function(r){return [r.id,label(r)]}),B?B.id:'');
 if(!B){out.appendChild(el('p','meta','No other run on '+A.tag+' ('+A.data.label+') to pair with.'));return}
 var p=PAIRS[A.i+','+B.i],flip=false;if(!p){p=PAIRS[B.i+','+A.i];flip=!!p}
 out.setAttribute('data-a',A.id);out.setAttribute('data-b',B.id);
 if(!p){out.appendChild(el('p','note','This pair was not precomputed (only the '+D.pair_runs+' best runs of each data set are paired here). Compare them with:'));
  out.appendChild(el('code',null,'coinflip compare '+quote(pathOf(A))+' '+quote(pathOf(B))));return}
 if(!p.shared){out.appendChild(el('p','note','These two runs share no question ('+A.tag+', '+A.data.label+'): a paired test needs questions both answered, so there is none. Runs with the same --limit and --seed ask the same questions.'));return}
 var oa=flip?p.only_b:p.only_a,ob=flip?p.only_a:p.only_b;
 out.appendChild(el('p',null,'On the '+p.shared+' questions both answered ('+A.tag+', '+A.data.label+'), A was right where B was wrong on '+oa+', and B right where A was wrong on '+ob+'. '+
  (p.p_exact<0.05?'The difference is significant at the 5% level (exact McNemar p = '+g(p.p_exact)+').':'No significant difference at the 5% level (exact McNemar p = '+g(p.p_exact)+').')));
 var t=el('table','stats'),h=el('tr'),v=el('tr');[['shared',p.shared],['only A right',oa],['only B right',ob],['chi2',p.chi2.toFixed(4)],['p',g(p.p_value)],['chi2 corrected',p.chi2_corrected.toFixed(4)],['p corrected',g(p.p_corrected)],['p exact',g(p.p_exact)]].forEach(function(c){
  h.appendChild(el('th',null,c[0]));var td=el('td','num',c[1]);td.setAttribute('data-stat',c[0]);v.appendChild(td)});t.appendChild(h);t.appendChild(v);out.appendChild(t);
 out.appendChild(el('h3',null,'Questions where they disagree ('+(p.rows.length<p.total?'first '+p.rows.length+' of ':'')+p.total+')'));
 var q=el('table','disagree'),hr=el('tr');['question','people','target','A: '+label(A),'B: '+label(B)].forEach(function(c,i){hr.appendChild(el('th',i>2?'v':null,c))});q.appendChild(hr);
 p.rows.forEach(function(c){var Q=D.questions[c[0]],tr=el('tr','dq'),qd=el('td'),det=el('details');det.appendChild(el('summary',null,Q[0].length>110?cut(Q[0],110)+'\u2026':Q[0]));det.appendChild(el('pre',null,Q[0]));qd.appendChild(det);tr.appendChild(qd);
  tr.appendChild(el('td','num',Q[2]));tr.appendChild(el('td','k',Q[1]));
  [[flip?c[2]:c[1],flip?c[4]:c[3]],[flip?c[1]:c[2],flip?c[3]:c[4]]].forEach(function(x){var td=el('td','k');td.appendChild(el('span',x[0]===Q[1]?'ok':'bad',x[0]));td.appendChild(el('pre',null,D.replies[x[1]]));tr.appendChild(td)});q.appendChild(tr)});
 out.appendChild(q)}
function filters(){var models=dict();RUNS.forEach(function(r){models[r.model]=1});
 options($('f-model'),[['','all models']].concat(Object.keys(models).sort().map(function(m){return [m,m]})),S.model);
 options($('f-data'),[['','all data']].concat(D.datasets.map(function(d){return [d.key,d.tag+' \u00b7 '+d.label+' \u00b7 '+d.sha+' ('+d.runs+' runs)']})),S.data);
 $('f-status').value=S.status;if($('f-q').value!==S.q)$('f-q').value=S.q}
function update(){var t0=performance.now();writeHash();VIEW=visible();LIMIT=PAGE;head();table();var drawn=selected(VIEW);chart(drawn);bars('latency',drawn,'lat');bars('tokens',drawn,'tok');pairView(VIEW);
 document.body.setAttribute('data-rows',VIEW.length);void document.body.offsetHeight;document.body.setAttribute('data-render-ms',(performance.now()-t0).toFixed(1));document.body.setAttribute('data-ready','1');
 var sc=document.querySelector('.scroll');document.body.setAttribute('data-board-overflow',Math.max(0,sc.scrollWidth-sc.clientWidth));}
function bind(id,key,ev){$(id).addEventListener(ev||'change',function(){S[key]=$(id).value;if(key==='a')S.b='';update()})}
readHash();filters();bind('f-model','model');bind('f-data','data');bind('f-status','status');bind('f-q','q','input');bind('p-a','a');bind('p-b','b');
window.addEventListener('hashchange',function(){readHash();filters();update()});
update();
})();
{% endraw %}
